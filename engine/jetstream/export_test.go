package jetstream

import (
	"fmt"
	"strings"
	"time"
)

// Held describes every chunk the publisher holds, per source, for a
// test's failure message.
func (p *Publisher) Held() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	names := [...]string{"free", "queued", "sent", "retry", "waiting", "done"}
	now := time.Now()
	for src, q := range p.sources {
		fmt.Fprintf(&b, "source %d (head %d last %d):", src, q.head, q.last)
		for j := q.head; j >= 0; j = p.slots[j].next {
			s := &p.slots[j]
			fmt.Fprintf(&b, " %d:%s(seq %d, due %v)", j, names[s.state], s.c.Seq, s.deadline.Sub(now).Round(time.Millisecond))
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "wake %v, paused %v", p.wake.Sub(now).Round(time.Millisecond), p.pauseTill.Sub(now).Round(time.Millisecond))
	return b.String()
}
