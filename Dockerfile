# vkpy's image: `python -m vkpy` as a non-root user on a slim Python base.
#   docker build -t <registry>/vkpy:0.1.0 .
#   docker push <registry>/vkpy:0.1.0
#   helm install vk charts/vkpy --set image.repository=<registry>/vkpy
# The chart runs it with a read-only root filesystem: state goes to /var/lib/vkpy and
# /tmp, both emptyDir volumes. The same image runs the CSR approver
# (`python -m vkpy.tools.approver`).

# --- build: a wheel of vkpy and wheels of its dependencies -----------------------------
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY vkpy ./vkpy
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# --- run ---------------------------------------------------------------------------------
FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --gid 10001 vkpy \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/vkpy --shell /usr/sbin/nologin vkpy \
 && install -d -o 10001 -g 10001 /var/lib/vkpy
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels vkpy && rm -rf /wheels
USER 10001:10001
WORKDIR /var/lib/vkpy
EXPOSE 10250 10248 10255
ENTRYPOINT ["python", "-m", "vkpy"]
