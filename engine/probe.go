package engine

import "github.com/sluice-io/sluice/ring"

// ProbeURing returns what the io_uring probe found on this machine, as
// the readable report a start-up log or `sluice-bench probe` prints (the
// kernel, whether io_uring is usable and why not, the features found),
// and the kernel's release ("6.18.4-arch1"; empty where there is no
// uname). The probe runs once per process and is the one auto reads when
// it picks a runner. ProbeURing is safe for concurrent use.
func ProbeURing() (report, kernel string) {
	p := ring.Probe()
	return p.String(), p.Kernel.Release
}
