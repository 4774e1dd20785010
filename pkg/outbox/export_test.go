package outbox

// SetAfterSend installs a hook that runs between the broker's ack and the mark.
func SetAfterSend(f func()) { afterSend = f }

// StatsQuery and StatsHead expose ReadStats's statement to the EXPLAIN test.
const (
	StatsQuery = statsQuery
	StatsHead  = statsHead
)

// DropCheck exposes DropParts's check of a partition to the EXPLAIN test.
var DropCheck = dropCheck

// The reads of the unacknowledged rows, for the EXPLAIN test.
const (
	HighestUnacknowledgedQuery = highestUnacknowledgedQuery
	UnacknowledgedThroughQuery = unacknowledgedThroughQuery
)
