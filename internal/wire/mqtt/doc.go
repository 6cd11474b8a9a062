// Package mqtt decodes the MQTT control packets (3.1.1 and 5) a broker
// sends a subscriber: the fixed header and remaining length, a PUBLISH's
// parts, MQTT 5 properties and the protocol's UTF-8 strings. It allocates
// nothing: what it returns aliases the packet. The MQTT source of
// srcs/mqtt frames and checks its stream with it, and that package's
// ForEachMQTTMessage walks a chunk's messages with it.
package mqtt
