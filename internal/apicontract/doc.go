// Package apicontract checks docs/openapi.yaml as a client generator and a
// mock read it: its test fails when an example does not match its schema,
// when an operation's request or answer has no example, or when an answer
// the server can give is not declared.
package apicontract
