package file

import (
	"math"
	"testing"
)

func TestParseFio(t *testing.T) {
	out := []byte(`note: both iodepth >= 1 and synchronous I/O engine are selected
{"fio version":"fio-3.36","jobs":[{"jobname":"f0","read":{"io_bytes":1073741824,"bw_bytes":7000000000,"runtime":153},"usr_cpu":10.0,"sys_cpu":90.0}]}`)
	r, err := parseFio(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 1<<30 || r.ThroughputBps != 7e9 || math.Abs(r.CPUS-0.153) > 1e-9 {
		t.Errorf("parseFio = %+v", r)
	}
	if _, err := parseFio([]byte(`{"jobs":[]}`)); err == nil {
		t.Error("empty fio output accepted")
	}
}

func TestFileRatiosPerRound(t *testing.T) {
	results := []FileResult{
		{Method: "read-loop", Round: 0, VsReadLoop: 1, VsFio: 0.9},
		{Method: "fio-psync", Round: 0, VsReadLoop: 1.1, VsFio: 1},
		{Method: "uring", Round: 0, VsReadLoop: 0.8, VsFio: 0.7},
		{Method: "uring", Round: 1, VsReadLoop: 0.6, VsFio: 0.5},
		{Method: "uring", Round: 2, VsReadLoop: 0.7, VsFio: 0.9},
	}
	got := fileRatios(results)
	if len(got) != 2 {
		t.Fatalf("%d ratios, want uring over fio and over the read loop: %+v", len(got), got)
	}
	fio := got[0]
	if fio.Metric != "uring/fio-psync throughput" || fio.Median != 0.7 || fio.Min != 0.5 || fio.Max != 0.9 {
		t.Errorf("vs fio: %+v, want median 0.7 over 0.5-0.9", fio)
	}
	if loop := got[1]; loop.Median != 0.7 || loop.Min != 0.6 || loop.Max != 0.8 {
		t.Errorf("vs read loop: %+v, want median 0.7 over 0.6-0.8", loop)
	}
}
