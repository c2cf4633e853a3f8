package sluice

// DefaultName is Rule.defaultName, for the tests of package sluice_test.
var DefaultName = Rule.defaultName
