package node

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/sluice-io/sluice/engine/jetstream"
)

// checkCredsFile reads a NATS creds file as the NATS client will at
// connect, so that a wrong file fails the node at load, and `sluice
// check`, in the file's terms: it must hold a user's JWT and that user's
// NKey seed (as `nsc generate creds` writes them), and the JWT must not
// have expired. Whether the server knows the user's account only the
// server can say (see authRefused).
func checkCredsFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return fmt.Errorf("%s: no user JWT in it (a creds file holds a user's JWT and NKey seed, as nsc writes it): %v", path, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s: no user NKey seed in it: %v", path, err)
	}
	pub, err := kp.PublicKey()
	kp.Wipe()
	if err != nil {
		return fmt.Errorf("%s: its NKey seed: %v", path, err)
	}
	if pub != uc.Subject {
		return fmt.Errorf("%s: the NKey seed is not the JWT's user's (the JWT is for %s, the seed for %s)", path, uc.Subject, pub)
	}
	if uc.Expires > 0 && time.Now().Unix() >= uc.Expires {
		return fmt.Errorf("%s: the user's JWT expired at %s", path, time.Unix(uc.Expires, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

// credentialKeys names the credential keys set in cfg, as the node file
// spells them under output.jetstream.
func credentialKeys(cfg *jetstream.Config) string {
	var keys []string
	if cfg.User != "" {
		keys = append(keys, "user")
	}
	for _, k := range []struct {
		set  bool
		name string
	}{
		{cfg.Password != "", "password"}, {cfg.PasswordFile != "", "password_file"}, {cfg.PasswordEnv != "", "password_env"},
		{cfg.Token != "", "token"}, {cfg.TokenFile != "", "token_file"}, {cfg.TokenEnv != "", "token_env"},
		{cfg.NKeySeedFile != "", "nkey_seed_file"}, {cfg.CredsFile != "", "creds_file"},
	} {
		if k.set {
			keys = append(keys, k.name)
		}
	}
	return strings.Join(keys, ", ")
}

// authRefused says, in the node file's terms, that the server refused the
// output's credentials, when err is such a refusal: it returns the key at
// fault (the output's, or its creds_file) and why. Otherwise it returns
// the output's key and err. A creds file that passed checkCredsFile is
// refused when the server does not trust the operator that signed the
// user's account, or does not know the account (its resolver was not
// given the account's JWT).
func authRefused(cfg *jetstream.Config, err error) (string, error) {
	const at = "output.jetstream"
	auth := errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation")
	if !auth {
		return at, err
	}
	keys := credentialKeys(cfg)
	switch {
	case keys == "":
		return at, fmt.Errorf("the server wants credentials and none are set (user and password, token, nkey_seed_file or creds_file): %w", err)
	case cfg.CredsFile != "":
		return at + ".creds_file", fmt.Errorf("the server refused the user in %s (does it trust the operator that signed the account, and know the account?): %w", cfg.CredsFile, err)
	}
	return at, fmt.Errorf("the server refused the credentials (%s): %w", keys, err)
}
