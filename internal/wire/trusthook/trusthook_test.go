package trusthook_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluice-io/sluice/internal/wire/trusthook"
	"github.com/sluice-io/sluice/srcs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWithoutTrust: a program that does not link srcs/trust (as this
// test does not) is refused a listener or a client that asks for TLS or
// the PROXY protocol, where it asks, with what to import.
func TestWithoutTrust(t *testing.T) {
	if trusthook.Get() != nil {
		t.Fatal("a provider without srcs/trust")
	}
	const want = `import _ "github.com/sluice-io/sluice/srcs/trust"`
	tlsCfg := &srcs.TLSConfig{CertFile: "c.pem", KeyFile: "k.pem"}
	for _, tc := range []struct {
		name string
		open func() error
		key  string
	}{
		{"a TLS listener", func() error {
			_, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{TLS: tlsCfg})
			return err
		}, "tls"},
		{"a PROXY listener", func() error {
			_, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{ProxyProtocol: &srcs.ProxyProtocolConfig{Trusted: []string{"10.0.0.1"}}})
			return err
		}, "proxy_protocol"},
		{"a TLS client", func() error {
			_, err := srcs.NewTCPClient(srcs.TCPClientConfig{Addr: "127.0.0.1:1", TLS: &srcs.TLSConfig{}})
			return err
		}, "tls"},
	} {
		err := tc.open()
		if err == nil || !strings.Contains(err.Error(), tc.key+" is package srcs/trust's") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s without srcs/trust: %v", tc.name, err)
		}
	}
}
