package srcs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// enableDropCounter sets SO_RXQ_OVFL (Linux 2.6.33), which makes the kernel
// count the datagrams it drops for the socket and attach the count to
// every datagram as a control message.
func enableDropCounter(fd int) error {
	return os.NewSyscallError("setsockopt", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1))
}

// udpDrops finds the socket with inode ino in /proc/net/udp or
// /proc/net/udp6 and returns its drops column.
func udpDrops(ino uint64) (uint64, error) {
	want := strconv.AppendUint(nil, ino, 10)
	for _, path := range [...]string{"/proc/net/udp", "/proc/net/udp6"} {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Scan() // the header
		for sc.Scan() {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
			f := bytes.Fields(sc.Bytes())
			if len(f) < 13 || !bytes.Equal(f[9], want) {
				continue
			}
			n, err := strconv.ParseUint(string(f[12]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: drops column %q: %w", path, f[12], err)
			}
			return n, nil
		}
		if err := sc.Err(); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	return 0, fmt.Errorf("socket inode %d is in neither /proc/net/udp nor /proc/net/udp6: %w", ino, fs.ErrNotExist)
}
