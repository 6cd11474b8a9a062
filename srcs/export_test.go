package srcs

// Exported to the srcs_test package.
var (
	SplitRecords = splitRecords
	RecordFlags  = recordFlags
)
