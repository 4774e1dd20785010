package outbox

// ClaimQuery exposes the claim statement to the EXPLAIN test.
const ClaimQuery = claimQuery

// SetAfterSend installs a hook that runs between the broker's ack and the mark.
func SetAfterSend(f func()) { afterSend = f }

// MarkQuery and IDRange expose the mark statement to the EXPLAIN test.
const MarkQuery = markQuery

var IDRange = idRange

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
