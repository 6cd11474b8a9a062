package uring

import "unsafe"

// SupportedOps asks the kernel which opcodes it supports
// (IORING_REGISTER_PROBE, 5.6). An error wraps ErrNotSupported.
func (r *Ring) SupportedOps() (OpSet, error) {
	var buf probeBuf
	if _, err := r.register(registerProbe, unsafe.Pointer(&buf), uint32(len(buf.ops))); err != nil {
		return OpSet{}, &NotSupportedError{Op: "probe", Reason: "IORING_REGISTER_PROBE failed; it needs 5.6", Err: err}
	}
	var s OpSet
	for _, op := range buf.ops[:min(int(buf.hdr.opsLen), len(buf.ops))] {
		if op.flags&probeOpSupported != 0 {
			s.Add(Op(op.op))
		}
	}
	return s, nil
}
