package uring

import "fmt"

// Config sizes a ring and picks its setup flags. The zero value is usable.
type Config struct {
	// Entries is the submission queue size, rounded up to a power of two by
	// the kernel. Zero means 256; the maximum is 32768.
	Entries uint32 `yaml:"entries"`

	// CQEntries is the completion queue size, rounded up to a power of two.
	// Zero lets the kernel pick twice the SQ size. It must be at least
	// Entries; the maximum is 65536. Setting it adds SetupCQSize (5.5).
	CQEntries uint32 `yaml:"cq_entries"`

	// Flags are the setup flags to ask for. Zero means DefaultFlags. New
	// drops them one by one while the kernel rejects them; Ring.Flags
	// reports what was granted.
	Flags SetupFlags `yaml:"flags"`
}

// DefaultEntries is the SQ size used when Config.Entries is zero.
const DefaultEntries = 256

func (c Config) withDefaults() (Config, error) {
	if c.Entries == 0 {
		c.Entries = DefaultEntries
	}
	if c.Flags == 0 {
		c.Flags = DefaultFlags
	}
	if c.Entries > maxSQEntries {
		return c, fmt.Errorf("ring: config: Entries %d exceeds %d", c.Entries, maxSQEntries)
	}
	if c.CQEntries != 0 {
		if c.CQEntries > maxCQEntries {
			return c, fmt.Errorf("ring: config: CQEntries %d exceeds %d", c.CQEntries, maxCQEntries)
		}
		if roundPow2(c.CQEntries) < roundPow2(c.Entries) {
			return c, fmt.Errorf("ring: config: CQEntries %d is smaller than Entries %d", c.CQEntries, c.Entries)
		}
		c.Flags |= SetupCQSize
	}
	return c, nil
}

func roundPow2(v uint32) uint32 {
	p := uint32(1)
	for p < v {
		p <<= 1
	}
	return p
}
