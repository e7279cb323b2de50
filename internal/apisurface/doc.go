// Package apisurface holds no code: its test checks the module's public
// surface. Every package outside internal/ and cmd/ is importable by
// code outside the module, which cannot name an internal package's
// types; so no exported declaration of such a package may name one —
// not in a signature, a field, a method, a variable's type or a type
// argument.
package apisurface
