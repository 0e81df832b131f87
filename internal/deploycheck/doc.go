// Package deploycheck tests the deployment files at the repository's root
// (docker-compose.yml, Dockerfile) against the code: CI has no Docker
// engine, so instead of starting the stack it checks that the compose file
// parses, wires its services with health checks, and gives the orchestrator
// only settings that config.Load reads, the required ones included. It has
// no code of its own; scripts/check-dockerfiles.sh checks the Dockerfiles'
// packages and build commands.
package deploycheck
