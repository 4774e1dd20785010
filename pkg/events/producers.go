package events

import "slices"

// The services, by the name each puts in its envelopes' producer field. In a
// deployment with SASL each is also the user name of the service's Kafka
// principal, which the broker's ACLs allow to write only the topics Writers
// gives it.
const (
	ServiceMeter   = "meter"
	ServiceUsage   = "usage"
	ServiceBilling = "billing"
	ServiceInvoice = "invoice"
	ServiceQuery   = "query"
)

// Services lists every service that produces events.
var Services = []string{ServiceMeter, ServiceUsage, ServiceBilling, ServiceInvoice, ServiceQuery}

// writers is who may publish on each topic: a domain topic is its owning
// service's alone; every service announces its quarantines and redrives on
// ops.events.v1; only query (the operator's API) asks for redrives.
var writers = map[string][]string{
	TopicMeter:       {ServiceMeter},
	TopicUsage:       {ServiceUsage},
	TopicBilling:     {ServiceBilling},
	TopicInvoice:     {ServiceInvoice},
	TopicOps:         Services,
	TopicOpsCommands: {ServiceQuery},
}

// Writers returns the services allowed to publish on topic, nil for a topic
// outside the contract. The broker's ACLs grant each service's principal
// WRITE on exactly the topics that list it.
func Writers(topic string) []string { return slices.Clone(writers[topic]) }

// Owner returns the service that owns events of eventType (the only one that
// may publish them), "" for a type every service publishes (the ops events)
// or a type outside the contract.
func Owner(eventType string) string {
	if w := writers[byType[eventType].topic]; len(w) == 1 {
		return w[0]
	}
	return ""
}

// Authorized reports whether an event of eventType that names producer may
// be consumed from topic: the type is of the contract, topic is the type's
// own, and producer is among the topic's writers. The topic is what the
// broker vouches for (a principal writes only its own topics), so a service
// allowed to write usage.events.v1 cannot make a ChargeRated reach invoice;
// the producer field must agree with it.
func Authorized(eventType, producer, topic string) bool {
	k, ok := byType[eventType]
	return ok && k.topic == topic && slices.Contains(writers[topic], producer)
}
