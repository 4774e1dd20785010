// Package deploy holds the deployment files and the tests that keep them honest.
package deploy
