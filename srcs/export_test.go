package srcs

// Exported to the srcs_test package.
var (
	SplitRecords = splitRecords
	RecordFlags  = recordFlags
	LastByte     = lastByte
)

// ReadProxyHeader is the listener's PROXY header reader, for the fuzz
// target.
var ReadProxyHeader = proxyProtocol().ReadHeader

// ParseSize is parseSize, for its fuzz test.
var ParseSize = parseSize
