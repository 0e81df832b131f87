// Package repocheck tests the repository against its own rules, with no
// code of its own: the deployment files at the root (docker-compose.yml,
// Dockerfile) against the code (CI has no Docker engine, so instead of
// starting the stack it checks that the compose file parses, wires its
// services with health checks, and gives the orchestrator only settings
// that config.Load reads, the required ones included;
// scripts/check-dockerfiles.sh checks the Dockerfiles' packages and build
// commands), the packages' imports against their layer order
// (layers_test.go), the order of the named queries in sql/queries
// (queries_test.go), and the docs' links against the files and headings
// they name (links_test.go).
package repocheck
