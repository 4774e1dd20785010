// Package money is the model-based money test (issue 10 item 6, `make
// money-test`): a seeded sequence of random operations — prices of every
// model with version changes, usage with replays, conflicts, late and
// out-of-order facts, credits and debits, explicit closes, corrections after
// issue — sent over HTTP to the running services, and an in-memory reference
// model that predicts every answer, every charge, every invoice, every
// correction note and every query summary to the minor unit.
//
// The model is written independently of the services: it imports nothing
// from services/, nor pkg/pricing or pkg/money. Its pricing arithmetic
// (pricing.go) and its minor units (currencies) are its own, from DESIGN.md
// sections 3 and 7 and decisions 0008, 0010, 0011 and 0012.
//
// Time: the model reads time through a Clock and maps instants to periods
// in a time zone (UTC today). Closes are explicit operations. Automatic
// closes (period end plus grace) can be added as an operation the model
// derives from the Clock once the services have them: see the README.
package money
