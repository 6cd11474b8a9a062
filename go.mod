module github.com/sluice-io/sluice

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/dustin/go-humanize v1.1.0
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/mochi-mqtt/server/v2 v2.7.9
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.49.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/gorilla/websocket v1.5.0 // indirect
	github.com/rs/xid v1.4.0 // indirect
)
