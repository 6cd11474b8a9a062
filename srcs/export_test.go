package srcs

// Exported to the srcs_test package.
var (
	SplitRecords = splitRecords
	RecordFlags  = recordFlags
	LastByte     = lastByte
)

// ReadProxyHeader is readProxyHeader, for the fuzz target.
var ReadProxyHeader = readProxyHeader
