package events

import (
	"strconv"
	"time"
)

// TypeUsageAcceptedThrough is usage's watermark of one partition of
// usage.events.v1 (decision 0014).
const TypeUsageAcceptedThrough = "UsageAcceptedThrough"

// AggregateUsageWatermark carries usage's watermarks (UsageAcceptedThrough).
// Each watermark is its own aggregate at version 1, id
// UsageWatermarkID(partition, through, salt), of tenant UsageWatermarkTenant:
// a watermark only raises what a consumer knows (the highest one wins), so
// nothing orders them and a lost or quarantined one is superseded by the
// next. The salt makes the partition key hash to the partition the
// watermark is about.
const AggregateUsageWatermark = "usage_watermark"

// UsageWatermarkTenant is the tenant id of usage's watermarks: they are
// about a partition, not a tenant.
const UsageWatermarkTenant = "_usage"

// UsageWatermarkID is the aggregate id of one watermark of a partition.
func UsageWatermarkID(partition int32, through time.Time, salt int) string {
	return "p" + strconv.Itoa(int(partition)) + "@" + strconv.FormatInt(through.UnixMicro(), 10) + "." + strconv.Itoa(salt)
}

// UsageAcceptedThrough: usage states that every UsageAccepted it committed
// with an acceptance time before Through is in partition Partition of
// usage.events.v1 before this message (the topic had Partitions partitions
// when it was sent). Usage publishes one per partition every interval,
// whether or not usage flows; a consumer that has applied one for every
// partition at or after an instant has received every fact accepted before
// that instant.
type UsageAcceptedThrough struct {
	Partition  int32     `json:"partition"`
	Partitions int32     `json:"partitions"`
	Through    time.Time `json:"through"`
}

// Validate checks the payload's own rules.
func (p UsageAcceptedThrough) Validate() error {
	return first(
		need(p.Partitions >= 1, "partitions"),
		need(p.Partition >= 0 && p.Partition < p.Partitions, "partition"),
		need(!p.Through.IsZero(), "through"),
	)
}
