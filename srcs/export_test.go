package srcs

// Exported to the srcs_test package.
var (
	SplitRecords = splitRecords
	RecordFlags  = recordFlags
)

// ReadProxyHeader is readProxyHeader, for the fuzz target.
var ReadProxyHeader = readProxyHeader
