// Package routing computes the routing tables of a plan. Pure: the planner publishes what it computes, the frontend,
// the workers and the simulator follow it.
package routing
