package mqtt

// Exported to the mqtt_test package.
var (
	SplitRecords = splitRecords
	RecordFlags  = recordFlags
)
