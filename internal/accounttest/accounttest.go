// Package accounttest holds what the fakes of an account's stores share in
// the tests of the functions that export and erase accounts.
package accounttest

import "fmt"

// Next is the index where a fake's page after the item named after
// starts: the fakes name their i-th item with format (e.g. "v%06d"), and
// an empty after is the first page.
func Next(format, after string) int {
	if after == "" {
		return 0
	}
	var i int
	fmt.Sscanf(after, format, &i)
	return i + 1
}
