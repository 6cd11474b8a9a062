package node

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// operator is a NATS operator made at test time, as nsc would make one:
// its key signs account JWTs, and account keys sign user JWTs.
type operator struct {
	t      *testing.T
	kp     nkeys.KeyPair
	claims *jwt.OperatorClaims
}

func newOperator(t *testing.T, name string) *operator {
	t.Helper()
	kp, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	oc := jwt.NewOperatorClaims(pub)
	oc.Name = name
	return &operator{t: t, kp: kp, claims: oc}
}

// account makes an account signed by the operator, with JetStream enabled
// when js is set, and returns its key and JWT.
func (o *operator) account(name string, js bool) (nkeys.KeyPair, string) {
	o.t.Helper()
	kp, err := nkeys.CreateAccount()
	if err != nil {
		o.t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	ac := jwt.NewAccountClaims(pub)
	ac.Name = name
	if js {
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	}
	tok, err := ac.Encode(o.kp)
	if err != nil {
		o.t.Fatal(err)
	}
	return kp, tok
}

// creds makes a user of the account whose key is acc and writes its creds
// file (the user's JWT and seed, decorated as nsc writes them) into dir.
// A non-zero expires is the JWT's expiry.
func (o *operator) creds(dir, file string, acc nkeys.KeyPair, user string, expires time.Time) string {
	o.t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		o.t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = user
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
	tok, err := uc.Encode(acc)
	if err != nil {
		o.t.Fatal(err)
	}
	seed, _ := kp.Seed()
	b, err := jwt.FormatUserConfig(tok, seed)
	if err != nil {
		o.t.Fatal(err)
	}
	return srcstest.WriteFile(o.t, dir, file, string(b))
}

// startOperatorNATS runs an embedded nats-server in operator mode: it
// trusts op, and resolves accounts from memory, which holds a system
// account and the given accounts' JWTs.
func startOperatorNATS(t *testing.T, op *operator, accounts ...[2]string) *server.Server {
	t.Helper()
	res := &server.MemAccResolver{}
	sysKP, sysJWT := op.account("SYS", false)
	sysPub, _ := sysKP.PublicKey()
	for _, a := range append(accounts, [2]string{sysPub, sysJWT}) {
		if err := res.Store(a[0], a[1]); err != nil {
			t.Fatal(err)
		}
	}
	return startNATSWith(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{op.claims}, AccountResolver: res, SystemAccount: sysPub})
}

// TestNodeJetStreamCredsFile publishes through a server in operator mode
// with a creds file (a user JWT and its NKey seed, made at test time), and
// checks that wrong creds files fail the node in the node file's terms:
// at load for a file that is not a user's creds, or whose seed or expiry
// is wrong; at start for a user the server does not know.
func TestNodeJetStreamCredsFile(t *testing.T) {
	dir := t.TempDir()
	op := newOperator(t, "sluice-test")
	acc, accJWT := op.account("INGEST", true)
	accPub, _ := acc.PublicKey()
	ns := startOperatorNATS(t, op, [2]string{accPub, accJWT})
	good := op.creds(dir, "node.creds", acc, "sluice-node", time.Time{})
	body := func(creds string) string {
		return "sources:\n  - tcp: {listen: 127.0.0.1:0}\noutput:\n  jetstream:\n    url: " + ns.ClientURL() +
			"\n    subject: ingest.raw\n    stream: INGEST\n    creds_file: " + creds + "\n"
	}

	tn := startNode(t, body(good))
	const conns, per = 3, 50_000
	for range conns {
		c, err := net.Dial("tcp", tn.addr("tcp"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(strings.Repeat("c", per))); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// Read the stream back as the same user.
	nc, err := nats.Connect(ns.ClientURL(), nats.UserCredentials(good))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	readIngest(t, nc, conns*per)
	rep, err := tn.stop()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Bytes != conns*per || rep.Published != rep.Delivered {
		t.Fatalf("node report %+v", rep)
	}

	// Wrong creds files.
	stranger := newOperator(t, "stranger")
	strangerAcc, _ := stranger.account("ELSEWHERE", true)
	other := op.creds(dir, "other.creds", acc, "other", time.Time{})
	mixed := srcstest.WriteFile(t, dir, "mixed.creds", strings.SplitAfter(readFile(t, good), "------END NATS USER JWT------")[0]+
		strings.SplitAfter(readFile(t, other), "------END NATS USER JWT------")[1])
	for _, tc := range []struct {
		name, file, want string
	}{
		{"not a creds file", srcstest.WriteFile(t, dir, "junk.creds", "not a creds file\n"),
			"node.yaml:8: output.jetstream.creds_file: " + dir + "/junk.creds: no user JWT in it"},
		{"missing", dir + "/none.creds", "node.yaml:8: output.jetstream.creds_file: open " + dir + "/none.creds: no such file or directory"},
		{"seed of another user", mixed, "node.yaml:8: output.jetstream.creds_file: " + mixed + ": the NKey seed is not the JWT's user's"},
		{"expired", op.creds(dir, "expired.creds", acc, "late", time.Now().Add(-time.Minute)),
			"output.jetstream.creds_file: " + dir + "/expired.creds: the user's JWT expired at"},
		{"account unknown to the server", stranger.creds(dir, "stranger.creds", strangerAcc, "intruder", time.Time{}),
			"output.jetstream.creds_file: the server refused the user in " + dir + "/stranger.creds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newTestNode(t, body(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("node with %s: %v\nwant it to say %q", tc.name, err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
