// Package deploy holds no code: it is the directory of deployment files
// (systemd unit, Containerfile, Kubernetes manifests, docker compose, and
// configurations for nginx, Caddy and Traefik in front of an application),
// and its tests check each file against the real sluice binary: its flags,
// ports and endpoints, and, for nginx and Caddy, real proxy processes.
package deploy
