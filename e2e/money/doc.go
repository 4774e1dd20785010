// Package money is the model-based money test (`make money-test`,
// docs/money.md): a seeded sequence of random operations — prices of every
// model with version changes, usage with replays, conflicts, late and
// out-of-order facts, credits and debits, tenant time zones, grace
// periods and tax rates, prepaid credit grants, explicit closes and automatic
// ones at period end plus grace (driven by a controllable clock), draft
// invoices during grace, corrections after issue — sent over HTTP to the
// running services, and an in-memory reference model that predicts every
// answer, every charge, every invoice, every correction note, every query
// summary and every grant's balance to the minor unit.
//
// The model is written independently of the services: it imports nothing
// from services/, nor pkg/pricing or pkg/money. Its pricing arithmetic
// (pricing.go) and its minor units (currencies) are its own, from docs/money.md, the
// OpenAPI documents and decisions 0008, 0010, 0011 and 0012.
//
// Time: every service reads the test clock of decision 0015, the wall
// clock plus the offset in CLOCK_OFFSET_FILE, and so does the model
// (scenario.OffsetClock). Tenants set their time zone, grace period and tax rates
// (PUT .../settings, which replaces them all, from the period after the one
// in progress ten minutes ahead; the model predicts every issued invoice's
// tax lines on its rounded subtotal, its taxTotal and its total). A "grant"
// operation gives a tenant a credit grant (POST .../credit-grants: mostly in
// a currency it is billed in, effective now, at its period's end or later,
// some expiring); each issue, in the order the model closes periods, draws
// from the grants of its currency in effect at its period's end (lowest
// priority, earliest expiry, oldest) up to its total, and the model predicts
// its credit_applied lines, creditsApplied and amountDue, and each grant's
// balance and status in invoice's list (compared at every check; mutations
// credits-before-tax and grant-drawn-twice). An "advance" operation moves the clock to just after the next
// period end or close of any tenant (or a while before it, or a day or two
// past it); the model then expects billing's scheduler to close every period
// with charges whose end plus grace has passed (it waits until billing reads
// it closed and compares the issued invoices) and invoice to read the open
// invoices of a period in grace as draft (compared line by line). After
// every operation no period ends or closes within 20 minutes of now (the
// clock is moved past one that comes closer), so the wall clock alone never
// carries a period into grace or a close unseen. Every tenant registers the
// test's loopback webhook receiver (hooks.go); "alert" operations create
// and delete usage and spend alerts and "to-threshold" ones aim a fact at
// a usage alert's threshold, and the model predicts which alert.triggered
// deliveries each check finds (alerts.go; mutations alert-strictly-above,
// alert-retold-after-drop, alert-after-delete).
package money
