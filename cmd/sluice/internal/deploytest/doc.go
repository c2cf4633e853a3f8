// Package deploytest holds no code: its tests check each file of deploy/,
// the directory of deployment files (systemd unit, Containerfile,
// Kubernetes manifests, docker compose, and configurations for nginx, Caddy
// and Traefik in front of an application), against the real sluice binary:
// its flags, ports and endpoints, and, for nginx and Caddy, real proxy
// processes.
package deploytest
