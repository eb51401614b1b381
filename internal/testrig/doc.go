// Package testrig is what tests of the services share, so that each test states its scenario rather than its
// plumbing: an embedded JetStream server and connections that end with the test (server.go), the planner's bucket
// bound the way the other services bind it (bucket.go), services run until the test ends (run.go), waits for a
// condition instead of sleeps (wait.go), and a client that sees every reply (client.go).
//
// pkg/bus cannot use it (testrig imports bus), so bus's own tests build their servers themselves.
package testrig
