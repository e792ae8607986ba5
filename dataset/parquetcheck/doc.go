// Package parquetcheck checks longshore's Parquet reader against files
// written by another implementation, Apache Arrow's Go module
// (github.com/apache/arrow-go/v18/parquet/pqarrow). It is a module of
// its own so that Arrow and what it requires (a newer gRPC among them)
// never enter the main module's build: `make parquet-crosscheck` runs it
// (docs/parquet.md, "Tests").
package parquetcheck
