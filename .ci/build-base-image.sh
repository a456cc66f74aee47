#!/usr/bin/env bash
# Builds the sandbox base image offline: debootstrap a minimal Debian with python3, pytest, git and the
# language toolchains the language plug-ins run (envs/languages/: rustc and cargo, Go, a JDK, Node.js with
# TypeScript) from Debian's package mirror, then `docker import` it (`podman import` with ENGINE=podman).
# No image registry is needed.
set -euo pipefail
tag="${1:-harness-base:bookworm-langs3}"
engine="${ENGINE:-docker}"
if "$engine" image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag already present"
  exit 0
fi
root=$(mktemp -d /var/tmp/harness-rootfs.XXXXXX)
trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
echo "debootstrap into $root (a few minutes)"
debootstrap --variant=minbase --include=python3,python3-pytest,git,procps,ca-certificates \
  bookworm "$root" http://deb.debian.org/debian >/tmp/harness-debootstrap.log 2>&1 \
  || { tail -20 /tmp/harness-debootstrap.log; exit 1; }
# The toolchains, installed in the new root by its own apt (debootstrap's minbase cannot configure rustc
# among its base packages), from the same suites as the host's (.ci/run installs the same packages there,
# which bubblewrap sandboxes bind).
toolchains="rustc cargo golang-go default-jdk-headless maven junit4 junit5 libsurefire-java nodejs node-typescript"
cat > "$root/etc/apt/sources.list" <<'LIST'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
LIST
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$root/proc"  # the JDK's configuration runs java, which needs it
chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin TOOLCHAINS="$toolchains" \
  sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends $TOOLCHAINS' \
  >>/tmp/harness-debootstrap.log 2>&1 || { tail -20 /tmp/harness-debootstrap.log; exit 1; }
umount "$root/proc"
# What the installs left in /tmp (the JDK's hsperfdata_root, owned by root) would be in every sandbox's /tmp,
# where the sandbox's user cannot remove it and a reset fails.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/* "$root"/var/tmp/*
tar -C "$root" -c . | "$engine" import - "$tag"
echo "imported $tag"
