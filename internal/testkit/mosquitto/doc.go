// Package mosquitto runs Debian's mosquitto MQTT broker as an external
// process on a loopback port, and publishes numbered messages to a broker,
// for the soak (internal/app/soak) and the MQTT tests. A broker can be
// killed and started again where its clients expect it, as a crash would.
package mosquitto
