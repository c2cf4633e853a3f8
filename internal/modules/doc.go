// Package modules holds no code: its tests check how the repository is cut
// into modules. The library module (the root) must not bring the service's
// dependencies into its users' module graphs, and no module may import
// another module's internal packages.
package modules
