# The CUDA node image, assembled by integration/images/build.sh for
# scripts/cuda-image.sh (`make cuda-image`): as longshore.Dockerfile, with
# longshore-node built -tags cuda, nvJPEG (CUDA 11.8, Debian non-free) and
# the toolkit's libcuda.so.1 stub in /usr/lib, which the driver's copy
# shadows once the NVIDIA container runtime mounts it (docs/deploy.md).
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin
# What the runtime mounts from the host's driver: CUDA (compute), NVDEC
# for video (video) and nvidia-smi (utility). Which GPUs it exposes is
# the runtime's call: docker run --gpus, or a Kubernetes GPU request.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,video,utility
WORKDIR /data
ENTRYPOINT ["/usr/local/bin/longshore-node"]
