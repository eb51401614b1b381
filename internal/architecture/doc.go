// Package architecture holds the test that keeps the module's packages in their layers (docs/architecture.md): each
// package imports only from its own layer or those below, the policies and the simulator stay pure (no NATS, no
// HTTP, no Prometheus or OpenTelemetry, no global randomness), the services do not import one another, and only
// commands, tools and tests import the test helpers under internal/.
package architecture
