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
	return p.order.describe(time.Now(), func(i int32) uint64 {
		if h := p.msgs[i].h; h != nil {
			return h.c.Seq
		}
		return 0
	})
}

// describe lists every chunk o holds, per source, with its sequence
// number as seq tells it.
func (o *order) describe(now time.Time, seq func(int32) uint64) string {
	var b strings.Builder
	names := [...]string{"free", "queued", "sent", "retry", "waiting", "done"}
	for src, q := range o.sources {
		fmt.Fprintf(&b, "source %d (head %d last %d):", src, q.head, q.last)
		for j := q.head; j >= 0; j = o.slots[j].next {
			e := &o.slots[j]
			fmt.Fprintf(&b, " %d:%s(seq %d, due %v)", j, names[e.state], seq(j), e.deadline.Sub(now).Round(time.Millisecond))
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "wake %v, paused %v", o.wake.Sub(now).Round(time.Millisecond), o.pauseTill.Sub(now).Round(time.Millisecond))
	return b.String()
}
