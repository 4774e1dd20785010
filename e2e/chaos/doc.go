// Package chaos is the chaos suite's machinery: the whole system (package
// stack: the five services as OS processes, a real Apache Kafka broker,
// PostgreSQL, toxiproxy in front of Kafka and of each database) under a
// load of usage facts while faults are injected, then proof from the five
// databases that nothing was lost and nothing took effect twice. The
// scenarios themselves are the tests (build tag chaos): `make e2e`.
//
// # Load (Load, Ledger)
//
// For each scenario, three tenants of its own (s1-acme, ...): price
// version 1 of three meters (two in USD, one in KRW), then thousands of
// usage facts over HTTP, in batches (usage:batch) and one by one, paced
// over the scenario, stamped with the time they are first sent, while two
// new price versions are activated (each effective some seconds later, so
// facts on both sides of each effectiveAt exist). Some accepted facts are
// sent again on purpose, across requests and within one batch; each must
// be answered 200 with the same usage fact. Every fact is retried through
// transport errors, 503s and unknown_meter (usage has not got the price
// evidence yet) until it is answered as accepted. The Ledger keeps what
// was sent and answered: the reconciliation's account of what must exist.
// Only 127.0.0.1 is ever contacted.
//
// # Rest (Harness.WaitQuiet)
//
// After the load, and again after one adjustment per tenant and currency
// and the close of every period the tenant's usage fell in: every outbox
// drained with no dead letter, no event deferred or quarantined, and every
// consumer group's committed offsets at the end of its topics, in two
// readings a second apart, within a deadline, with progress every five
// seconds.
//
// # Reconciliation (Reconcile)
//
// Read directly from the five databases (past the proxies) for the
// scenario's tenants and compared by origin event id: meter's price
// versions replicated once each; every accepted usage fact present as sent
// and priced by the version in effect at its occurredAt (from meter's
// price table); exactly one charge per usage fact at quantity x that unit
// price, in the period it occurred in; every billing event version 1 of
// its own aggregate (decision 0007); every charge exactly one
// invoice_charge row in invoice with the same figures, and none extra;
// each issued invoice's charge lines the GROUP BY (meter, price version)
// of its invoice charges (quantity, count, amount), each adjustment the
// close counted one adjustment line and each one posted after the close
// one correction note; subtotal, half-even total and rounding line agreeing
// with the lines and with billing's sums; invoice numbers 1..n per tenant;
// query's projection holding every event once (an issued invoice as its
// InvoiceIssued, with its total) and its totals (folded totals plus
// unfolded deltas) equal to the services' sums; and each effect's event
// written to its service's outbox with it (nothing half-written). Findings
// are lost (an origin without its effect), duplicated (an origin with two
// effects, or an effect without an origin) and mismatched, each named by
// id. Reconcile reads a snapshot (recon_read.go), then runs one check per
// step of the pipeline (recon.go).
//
// # Real duplicates (Decisions, Kafka.ScanLog)
//
// Duplicates delivered and absorbed are the inboxes' DUPLICATE decisions,
// from each instance's inbox_decisions_total counter; see Decisions for
// how counts survive the process restarts that reset the counter. The
// topics' logs are read as well: an event id met twice in a topic is a
// duplicate publication (a relay that sent it again).
//
// # Time to recover (Harness.CaughtUp)
//
// From a fault's end until every usage fact accepted by then has its
// charge in billing, its copy (invoice_charge) in invoice and the charge in
// query's projection. The report shows the longest over a scenario's faults.
package chaos
