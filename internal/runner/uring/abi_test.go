package uring

import (
	"testing"
	"unsafe"
)

func TestABISizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"io_uring_sqe", unsafe.Sizeof(SQE{}), 64},
		{"io_uring_cqe", unsafe.Sizeof(CQE{}), 16},
		{"io_uring_params", unsafe.Sizeof(params{}), 120},
		{"io_sqring_offsets", unsafe.Sizeof(sqringOffsets{}), 40},
		{"io_cqring_offsets", unsafe.Sizeof(cqringOffsets{}), 40},
		{"io_uring_probe", unsafe.Sizeof(probeHeader{}), 16},
		{"io_uring_probe_op", unsafe.Sizeof(probeOp{}), 8},
		{"io_uring_buf", unsafe.Sizeof(bufRingEntry{}), 16},
		{"io_uring_buf_reg", unsafe.Sizeof(bufReg{}), 40},
		{"io_uring_rsrc_register", unsafe.Sizeof(rsrcRegister{}), 32},
		{"io_uring_files_update", unsafe.Sizeof(filesUpdate{}), 16},
		{"io_uring_getevents_arg", unsafe.Sizeof(getEventsArg{}), 24},
		{"__kernel_timespec", unsafe.Sizeof(Timespec{}), 16},
	} {
		if tc.got != tc.want {
			t.Errorf("sizeof(%s) = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestABIOffsets(t *testing.T) {
	var s SQE
	var c CQE
	var p params
	for _, tc := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"sqe.fd", unsafe.Offsetof(s.Fd), 4},
		{"sqe.off", unsafe.Offsetof(s.Off), 8},
		{"sqe.addr", unsafe.Offsetof(s.Addr), 16},
		{"sqe.len", unsafe.Offsetof(s.Len), 24},
		{"sqe.rw_flags", unsafe.Offsetof(s.OpFlags), 28},
		{"sqe.user_data", unsafe.Offsetof(s.UserData), 32},
		{"sqe.buf_index", unsafe.Offsetof(s.BufIndex), 40},
		{"sqe.personality", unsafe.Offsetof(s.Personality), 42},
		{"sqe.file_index", unsafe.Offsetof(s.FileIndex), 44},
		{"sqe.addr3", unsafe.Offsetof(s.Addr3), 48},
		{"cqe.res", unsafe.Offsetof(c.Res), 8},
		{"cqe.flags", unsafe.Offsetof(c.Flags), 12},
		{"params.features", unsafe.Offsetof(p.features), 20},
		{"params.sq_off", unsafe.Offsetof(p.sqOff), 40},
		{"params.cq_off", unsafe.Offsetof(p.cqOff), 80},
		{"io_uring_buf.resv (buf ring tail)", unsafe.Offsetof(bufRingEntry{}.resv), bufRingTailOffset},
	} {
		if tc.got != tc.want {
			t.Errorf("offsetof(%s) = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestFlagStrings(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{SetupFlags(0).String(), "0"},
		{DefaultFlags.String(), "SUBMIT_ALL|COOP_TASKRUN|TASKRUN_FLAG|SINGLE_ISSUER|DEFER_TASKRUN"},
		{(SetupCQSize | 1<<30).String(), "CQSIZE|0x40000000"},
		{(FeatSingleMmap | FeatExtArg).String(), "SINGLE_MMAP|EXT_ARG"},
		{OpRecv.String(), "RECV"},
		{OpPipe.String(), "PIPE"},
		{Op(200).String(), "OP(200)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestUserData(t *testing.T) {
	for _, tc := range []struct{ slot, gen uint32 }{{0, 0}, {1, 2}, {^uint32(0), 7}, {42, ^uint32(0)}} {
		slot, gen := UnpackUserData(PackUserData(tc.slot, tc.gen))
		if slot != tc.slot || gen != tc.gen {
			t.Errorf("round trip of (%d, %d) gave (%d, %d)", tc.slot, tc.gen, slot, gen)
		}
	}
}

func TestPrepLayout(t *testing.T) {
	var s SQE
	s.UserData = 99
	s.Flags = SQEIOLink // a Prep resets it
	s.PrepRecvMultishot(5, 3, 0)
	if s.Opcode != OpRecv || s.Fd != 5 || s.BufIndex != 3 || s.Flags != SQEBufferSelect ||
		RecvFlags(s.Ioprio) != RecvMultishot || s.UserData != 99 {
		t.Errorf("PrepRecvMultishot: %+v", s)
	}
	s.PrepCancelFd(7, CancelAll)
	if s.Opcode != OpAsyncCancel || s.Fd != 7 || CancelFlags(s.OpFlags) != CancelAll|CancelFd || s.Ioprio != 0 {
		t.Errorf("PrepCancelFd: %+v", s)
	}
	s.PrepPollMultishot(3, 1)
	if s.Len != pollAddMulti || s.OpFlags == 0 {
		t.Errorf("PrepPollMultishot: %+v", s)
	}
}
