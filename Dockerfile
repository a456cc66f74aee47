# The sandbox image: Python, git, pytest, the language plug-ins' toolchains (rustc and cargo, Go, a JDK with
# Maven and JUnit, Node.js with TypeScript) and the in-sandbox executor.
# CI builds it offline on a debootstrapped Debian: docker build --build-arg BASE_IMAGE=harness-base:bookworm-langs3 .
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# On the default public base these install what is missing; on the offline base they are already there.
RUN command -v git >/dev/null || (apt-get update && apt-get install -y --no-install-recommends git \
        && rm -rf /var/lib/apt/lists/*)
RUN python3 -c "import pytest" 2>/dev/null || python3 -m pip install --no-cache-dir pytest
RUN command -v cargo >/dev/null && command -v go >/dev/null && command -v mvn >/dev/null \
        && command -v node >/dev/null && [ -d /usr/share/nodejs/typescript ] || (apt-get update \
        && apt-get install -y --no-install-recommends rustc cargo golang-go default-jdk-headless maven junit4 junit5 \
           libsurefire-java nodejs node-typescript && rm -rf /var/lib/apt/lists/*)
# A sandbox's /tmp starts empty: what an install left there (a JVM's hsperfdata_root, owned by root) is not
# the sandbox user's to remove, and a reset would fail on it.
RUN rm -rf /tmp/* /var/tmp/*
RUN (getent passwd 1000 >/dev/null || (echo "agent:x:1000:1000::/tmp:/bin/sh" >> /etc/passwd \
        && echo "agent:x:1000:" >> /etc/group)) \
    && mkdir -p /repo /opt/pristine /opt/harness /run \
    && git config --system --add safe.directory '*' \
    && git config --system core.hooksPath /dev/null
COPY envs/executor.py /opt/harness/executor.py
ENV PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8
WORKDIR /repo
USER 1000:1000
ENTRYPOINT ["python3", "-I", "-S", "/opt/harness/executor.py"]
