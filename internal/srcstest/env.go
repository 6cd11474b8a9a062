package srcstest

// EnvRequireMosquitto set to "1" turns a missing mosquitto into a test
// failure instead of a skip; CI sets it.
const EnvRequireMosquitto = "SLUICE_REQUIRE_MOSQUITTO"
