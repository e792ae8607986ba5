# Assembled by integration/images/build.sh: the static MinIO server and the
# static healthcheck helper. No base image, no shell.
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin MINIO_BROWSER=off
EXPOSE 9000
ENTRYPOINT ["/usr/bin/minio"]
CMD ["server", "/data", "--address", ":9000"]
