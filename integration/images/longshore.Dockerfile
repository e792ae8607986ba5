# Assembled by integration/images/build.sh: rootfs/ holds the binaries, the
# shared libraries ldd lists for them (at the paths ldd resolved) and the
# dynamic loader. No base image, no shell.
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin
WORKDIR /data
ENTRYPOINT ["/usr/local/bin/longshore-node"]
