// Package doccheck holds the test that compiles every Go snippet of the
// documentation: the ```go blocks of README.md and docs/**/*.md, and the code
// blocks in the package doc comments of the module's non-main packages.
// docs/writing-docs.md says how a snippet is compiled and how to write one.
package doccheck
