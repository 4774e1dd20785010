// Package e2e holds the end-to-end tests that run the whole system.
package e2e
