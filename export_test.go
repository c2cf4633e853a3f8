package sluice

// DefaultName is defaultName, for the tests of package sluice_test.
var DefaultName = defaultName
