// Package srcstest holds test helpers for sources and runners: an Emitter
// that records and checks what a runner emits (streams and datagrams),
// fault-injection wrappers for sources and connections, and the one place
// that decides whether a test without io_uring or mosquitto skips or fails
// (RequireURing, RequireMosquitto).
//
// Only tests import it; a lint rule (lint_test.go) keeps it out of every
// other file. Pieces the soak needs as well as the tests, such as the
// external MQTT broker, live in packages of their own
// (internal/testkit/mosquitto).
package srcstest
