package soak

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
)

// SoakConns reports the stream connections. Rates are over the load's
// duration; the _max rates are the highest over one sampling period.
// PeakClient is the most connections open at once on the client side
// (exact), PeakEngine the most live engine sources of those connections
// (sampled every 10ms).
type SoakConns struct {
	Opened       uint64            `json:"opened"`
	Closed       uint64            `json:"closed"`
	TCP          uint64            `json:"tcp"`
	Unix         uint64            `json:"unix"`
	Ends         map[string]uint64 `json:"ends"`
	Verified     uint64            `json:"verified"`
	Bytes        uint64            `json:"bytes"`
	OpenRate     float64           `json:"open_rate_per_s"`
	CloseRate    float64           `json:"close_rate_per_s"`
	OpenRateMax  float64           `json:"open_rate_max_per_s"`
	CloseRateMax float64           `json:"close_rate_max_per_s"`
	PeakClient   int64             `json:"peak_client"`
	PeakEngine   int64             `json:"peak_engine"`
	PeaksReached int               `json:"peaks_reached"`
	DialErrors   uint64            `json:"dial_errors"`
	DialRetries  uint64            `json:"dial_retries"`
	// Unseen counts aborted connections the engine never saw, none of
	// whose bytes had been acknowledged (see connEnd); ListenOverflows is
	// how often, meanwhile, a full accept queue turned a handshake away,
	// counted over the whole host (TcpExt ListenOverflows).
	Unseen          uint64 `json:"aborted_unseen"`
	ListenOverflows uint64 `json:"listen_overflows"`
}

// SoakUDP reports the datagrams: every one sent was received or counted
// as dropped by the kernel (or by the engine, too large).
type SoakUDP struct {
	Enabled     bool   `json:"enabled"`
	Sent        uint64 `json:"sent"`
	SendErrors  uint64 `json:"send_errors"`
	Received    uint64 `json:"received"`
	Bytes       uint64 `json:"bytes"`
	KernelDrops uint64 `json:"kernel_drops"`
	TooLarge    uint64 `json:"too_large"`
	Reordered   uint64 `json:"reordered"`
}

// SoakTail reports the tailed file.
type SoakTail struct {
	Enabled       bool   `json:"enabled"`
	Lines         uint64 `json:"lines"`
	Received      uint64 `json:"received"`
	Duplicates    uint64 `json:"duplicates"`
	Renames       uint64 `json:"renames"`
	CopyTruncates uint64 `json:"copytruncates"`
	TailRotations uint64 `json:"tail_rotations"`
	TailTruncs    uint64 `json:"tail_truncations"`
}

// SoakMQTT reports the MQTT path. LostInRestarts counts messages the
// broker acknowledged to a publisher and lost when it was killed
// (persistence off), which only a restart window may excuse.
type SoakMQTT struct {
	Enabled        bool   `json:"enabled"`
	Published      uint64 `json:"published"`
	Received       uint64 `json:"received"`
	Duplicates     uint64 `json:"duplicates"`
	Restarts       uint64 `json:"restarts"`
	LostInRestarts uint64 `json:"lost_in_restarts"`
	Sessions       uint64 `json:"sessions"`
	Errors         uint64 `json:"errors"`
	// BrokerDropNotices counts the broker's log lines saying it dropped
	// messages for a client, read at each restart.
	BrokerDropNotices uint64 `json:"broker_drop_notices"`
}

// SoakWarmup reports the warm-up: connections opened until Peak were
// open at once, then all ended.
type SoakWarmup struct {
	Opened  uint64  `json:"opened"`
	Peak    int64   `json:"peak"`
	Seconds float64 `json:"seconds"`
}

// SoakEngine reports the engine's own totals.
type SoakEngine struct {
	Bytes     uint64            `json:"bytes"`
	Chunks    uint64            `json:"chunks"`
	PoolWaits uint64            `json:"pool_waits"`
	Errors    map[string]uint64 `json:"errors"`
}

// Report is the soak's JSON report.
type Report struct {
	Command    string       `json:"command"` // "soak"
	OK         bool         `json:"ok"`
	Runner     string       `json:"runner"`
	Seed       uint64       `json:"seed"`
	DurationS  float64      `json:"duration_s"` // the load's
	WallS      float64      `json:"wall_s"`     // set-up to teardown
	StopReason string       `json:"stop_reason"`
	Host       harness.Host `json:"host"`
	Config     soakParams   `json:"config"`
	Conns      SoakConns    `json:"conns"`
	UDP        SoakUDP      `json:"udp"`
	Tail       SoakTail     `json:"tail"`
	MQTT       SoakMQTT     `json:"mqtt"`
	Trust      SoakTrust    `json:"trust"`
	Engine     SoakEngine   `json:"engine"`
	Warmup     SoakWarmup   `json:"warmup"`
	Levels     struct {
		Start SoakLevels `json:"start"` // before any load
		Warm  SoakLevels `json:"warm"`  // after the warm-up
		Peak  SoakLevels `json:"peak"`  // the highest sampled
		End   SoakLevels `json:"end"`   // after the load
	} `json:"levels"`
	Leaks []string `json:"leaks"`
	// Mismatches holds the first soakMaxMismatches; MismatchCount counts
	// them all.
	Mismatches    []string     `json:"mismatches"`
	MismatchCount uint64       `json:"mismatch_count"`
	Samples       []SoakSample `json:"samples"`
}

type soakParams struct {
	PeakConns   int     `json:"peak_conns"`
	LowConns    int     `json:"low_conns"`
	CycleS      float64 `json:"cycle_s"`
	Churn       float64 `json:"churn_per_s"`
	ConnBytes   int64   `json:"conn_bytes"`
	UnixShare   float64 `json:"unix_share"`
	UDPRate     float64 `json:"udp_rate"`
	TailRate    float64 `json:"tail_rate"`
	RotateS     float64 `json:"rotate_s"`
	MQTTRate    float64 `json:"mqtt_rate"`
	MQTTPubs    int     `json:"mqtt_publishers"`
	MQTTRestart float64 `json:"mqtt_restart_s"`
	TrustRate   float64 `json:"trust_rate"`
	Pool        int     `json:"pool"`
	Buf         int64   `json:"buf"`
	FDLimit     uint64  `json:"fd_limit"`
}

// fill completes the report from the loads and the checker.
func (r *soakRun) fill(rep *Report) {
	sl := r.streams
	rep.Conns = SoakConns{
		Opened: sl.opened.Load(), Closed: sl.closed.Load(), TCP: sl.tcp.Load(), Unix: sl.unix.Load(),
		Ends: map[string]uint64{}, Verified: r.chk.verified.Load() - r.verified0, Bytes: sl.written.Load(),
		PeakClient: sl.peak.Load(), PeakEngine: sl.peakEngine.Load(), PeaksReached: int(sl.peaksReached.Load()),
		DialErrors: sl.dialErrs.Load(), DialRetries: sl.dialRetries.Load(), Unseen: r.chk.unseen.Load() - r.unseen0,
	}
	if ov, _ := listenOverflows(); ov >= r.overflows0 {
		rep.Conns.ListenOverflows = ov - r.overflows0
	}
	for i, name := range connEndNames {
		rep.Conns.Ends[name] = sl.ends[i].Load()
	}
	if rep.DurationS > 0 {
		rep.Conns.OpenRate = float64(rep.Conns.Opened) / rep.DurationS
		rep.Conns.CloseRate = float64(rep.Conns.Closed) / rep.DurationS
	}
	for i := 1; i < len(rep.Samples); i++ {
		a, b := rep.Samples[i-1], rep.Samples[i]
		if secs := b.T - a.T; secs > 0 {
			rep.Conns.OpenRateMax = max(rep.Conns.OpenRateMax, float64(b.Opened-a.Opened)/secs)
			rep.Conns.CloseRateMax = max(rep.Conns.CloseRateMax, float64(b.Closed-a.Closed)/secs)
		}
	}
	if sl.peak.Load() < int64(r.cfg.PeakConns) || sl.peakEngine.Load() < int64(r.cfg.PeakConns) {
		r.chk.failf("load: the peak of %d concurrent connections was not reached: %d open on the client side, %d live in the engine at most",
			r.cfg.PeakConns, sl.peak.Load(), sl.peakEngine.Load())
	}
	if n := sl.dialErrs.Load(); n > 0 {
		r.chk.failf("load: %d connections could not be made (first: %s)", n, sl.firstDialErr())
	}
	if r.udp != nil {
		rep.UDP = r.udpTotals()
	}
	if r.tailW != nil {
		rep.Tail = SoakTail{Enabled: true, Lines: r.tailW.written.Load(), Received: r.chk.tail.received.Load(),
			Duplicates: r.chk.tail.dups.Load(), Renames: r.tailW.renames.Load(), CopyTruncates: r.tailW.copyTruncs.Load(),
			TailRotations: r.tail.Rotations(), TailTruncs: r.tail.Truncations()}
	}
	if r.mq != nil {
		rep.MQTT = r.mq.report()
	}
	if r.trustL != nil {
		rep.Trust = r.trustL.report()
	}
	t := r.e.Totals()
	rep.Engine = SoakEngine{Bytes: t.Bytes, Chunks: t.Chunks, PoolWaits: r.e.Pool().Stats().Waits, Errors: map[string]uint64{}}
	for i, name := range engine.ErrorKinds {
		rep.Engine.Errors[name] = t.Errors[i]
	}
	rep.Mismatches, rep.MismatchCount = r.chk.mismatches()
	if rep.Mismatches == nil {
		rep.Mismatches = []string{}
	}
	rep.OK = rep.MismatchCount == 0 && len(rep.Leaks) == 0
}

// summary prints the mismatches, the leaks and the totals on ios.Err.
func (r *soakRun) summary(rep *Report) {
	w := r.ios.Err
	for _, m := range rep.Mismatches {
		fmt.Fprintf(w, "MISMATCH %s\n", m)
	}
	if n := rep.MismatchCount - uint64(len(rep.Mismatches)); n > 0 {
		fmt.Fprintf(w, "MISMATCH ... and %d more\n", n)
	}
	for _, l := range rep.Leaks {
		fmt.Fprintf(w, "LEAK %s\n", l)
	}
	cs := rep.Conns
	fmt.Fprintf(w, "sluice-soak: %s, %.0fs: %s connections opened, %s closed (%s/s and %s/s on average, at most %s/s and %s/s), peak %s open (%s in the engine), %s written, %s verified\n",
		rep.Runner, rep.DurationS, humanize.Comma(int64(cs.Opened)), humanize.Comma(int64(cs.Closed)),
		humanize.Comma(int64(cs.OpenRate)), humanize.Comma(int64(cs.CloseRate)),
		humanize.Comma(int64(cs.OpenRateMax)), humanize.Comma(int64(cs.CloseRateMax)),
		humanize.Comma(cs.PeakClient), humanize.Comma(cs.PeakEngine), report.FormatBytes(cs.Bytes), humanize.Comma(int64(cs.Verified)))
	fmt.Fprintf(w, "sluice-soak: ends %s; tcp %s, unix %s; %d aborted before the engine saw them (listen overflows on the host: %s)\n",
		formatEnds(cs.Ends), humanize.Comma(int64(cs.TCP)), humanize.Comma(int64(cs.Unix)), cs.Unseen, humanize.Comma(int64(cs.ListenOverflows)))
	if u := rep.UDP; u.Enabled {
		fmt.Fprintf(w, "sluice-soak: udp: %s sent, %s received, %s dropped by the kernel, %d too large, %d reordered\n",
			humanize.Comma(int64(u.Sent)), humanize.Comma(int64(u.Received)), humanize.Comma(int64(u.KernelDrops)), u.TooLarge, u.Reordered)
	}
	if t := rep.Tail; t.Enabled {
		fmt.Fprintf(w, "sluice-soak: tail: %s lines written, %s received, %d duplicates; %d renames, %d copytruncates (the tail saw %d rotations, %d truncations)\n",
			humanize.Comma(int64(t.Lines)), humanize.Comma(int64(t.Received)), t.Duplicates, t.Renames, t.CopyTruncates, t.TailRotations, t.TailTruncs)
	}
	if m := rep.MQTT; m.Enabled {
		fmt.Fprintf(w, "sluice-soak: mqtt: %s published, %s received, %d duplicates, %d broker restarts (%d messages lost with them), %d sessions, %d drop notices from the broker\n",
			humanize.Comma(int64(m.Published)), humanize.Comma(int64(m.Received)), m.Duplicates, m.Restarts, m.LostInRestarts, m.Sessions, m.BrokerDropNotices)
	}
	if t := rep.Trust; t.Enabled {
		fmt.Fprintf(w, "sluice-soak: trust: hostile peers %s refused; the TLS listener counted %s, the PROXY listener %s; "+
			"%s well-behaved TLS and %s proxied streams (%s), %s verified\n",
			formatCounts(t.Hostile, hostileNames[:]), formatCounts(t.TLSListener, nil), formatCounts(t.ProxyListener, nil),
			humanize.Comma(int64(t.GoodTLS)), humanize.Comma(int64(t.GoodProxied)), report.FormatBytes(t.GoodBytes), humanize.Comma(int64(t.GoodVerified)))
	}
	verdict := "OK"
	if !rep.OK {
		verdict = fmt.Sprintf("FAILED: %d mismatches, %d leaks", rep.MismatchCount, len(rep.Leaks))
	}
	fmt.Fprintf(w, "sluice-soak: %s (engine %s received, %s chunks, %s pool waits)\n", verdict,
		report.FormatBytes(rep.Engine.Bytes), humanize.Comma(int64(rep.Engine.Chunks)), humanize.Comma(int64(rep.Engine.PoolWaits)))
}

// formatCounts prints m's counts, in the order of names, or of its sorted
// keys without names.
func formatCounts(m map[string]uint64, names []string) string {
	if names == nil {
		for k := range m {
			names = append(names, k)
		}
		slices.Sort(names)
	}
	var parts []string
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %s", name, humanize.Comma(int64(m[name]))))
	}
	return strings.Join(parts, ", ")
}

func formatEnds(m map[string]uint64) string {
	var parts []string
	for _, name := range connEndNames {
		parts = append(parts, fmt.Sprintf("%s %s", name, humanize.Comma(int64(m[name]))))
	}
	return strings.Join(parts, ", ")
}
