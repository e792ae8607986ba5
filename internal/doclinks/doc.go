// Package doclinks holds one test: every relative link in the project's
// Markdown (README.md, CHANGELOG.md, docs/*.md and the other READMEs)
// names a file or directory of the repository, and every #anchor a
// heading of the page it points at, so a page that moves or a heading
// that is renamed fails `make test` instead of leaving a dead link.
package doclinks
