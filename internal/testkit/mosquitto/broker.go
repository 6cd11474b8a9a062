package mosquitto

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Bin returns the path of Debian's mosquitto broker
// (/usr/sbin/mosquitto, or mosquitto on PATH), or an error saying how to
// install it.
func Bin() (string, error) {
	if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
		return "/usr/sbin/mosquitto", nil
	}
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p, nil
	}
	return "", errors.New("mosquitto is not installed (/usr/sbin/mosquitto or on PATH); apt-get install mosquitto, or `make test`")
}

// Broker is an external mosquitto process on a fixed loopback port, so it
// can be restarted where clients expect it. Its methods are safe for
// concurrent use; Kill it before the program ends.
type Broker struct {
	// Addr is the broker's "127.0.0.1:port".
	Addr string
	bin  string
	conf string

	mu  sync.Mutex
	cmd *exec.Cmd
	log *bytes.Buffer
}

// Start runs the mosquitto at bin on a free loopback port, with
// its configuration in dir, and waits until it accepts connections. It
// allows anonymous clients and keeps nothing on disk.
func Start(bin, dir string) (*Broker, error) {
	return StartWith(bin, dir)
}

// StartWith is Start with more lines of configuration
// (mosquitto.conf(5)) after the defaults: "max_queued_messages 0", say,
// for a broker that never drops the QoS 1 messages of a subscriber that
// falls behind (mosquitto drops those past 1,000 queued by default).
func StartWith(bin, dir string, extra ...string) (*Broker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(dir, "mosquitto.conf")
	cfg := fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stderr\n", port)
	for _, l := range extra {
		cfg += strings.TrimSpace(l) + "\n"
	}
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	b := &Broker{Addr: addr, bin: bin, conf: conf}
	return b, b.Start()
}

// Start runs the broker again after Kill, and waits until it accepts
// connections.
func (b *Broker) Start() error {
	b.mu.Lock()
	if b.cmd != nil {
		b.mu.Unlock()
		return errors.New("mosquitto: already running")
	}
	b.log = &bytes.Buffer{}
	cmd := exec.Command(b.bin, "-c", b.conf)
	cmd.Stdout, cmd.Stderr = b.log, b.log
	err := cmd.Start()
	if err == nil {
		b.cmd = cmd
	}
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("mosquitto: start: %w", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.Addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			b.Kill()
			return fmt.Errorf("mosquitto: never listened on %s: %w; log:\n%s", b.Addr, err, b.Log())
		}
		time.Sleep(5 * time.Millisecond) // an external process: nothing to wait on
	}
}

// Kill stops the broker abruptly, as a crash would. It is idempotent.
func (b *Broker) Kill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	b.cmd.Process.Kill()
	b.cmd.Wait()
	b.cmd = nil
}

// Log returns what the broker has logged since it last started.
func (b *Broker) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		return "(still running)"
	}
	return b.log.String()
}
