"""Certificates for the TLS tests and bench/tls_cost.py, made with the
openssl tool (Debian's openssl): a CA, a server certificate for localhost
and 127.0.0.1, a client certificate, and a key that belongs to neither."""

import shutil
import subprocess


def openssl(*args, cwd):
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True)


def have_openssl():
    return shutil.which("openssl") is not None


def make_pki(d):
    """ca.pem, server.pem/.key (localhost, 127.0.0.1), client.pem/.key, and
    other.key (a key that belongs to neither), all in d."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", 2,
            "-subj", "/CN=infd test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for who, ext in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                "extendedKeyUsage=serverAuth\n"),
                     ("client", "extendedKeyUsage=clientAuth\n")):
        (d / f"{who}.ext").write_text(ext)
        openssl("req", *ec, "-keyout", f"{who}.key", "-out", f"{who}.csr",
                "-subj", f"/CN={'localhost' if who == 'server' else 'infd test client'}", cwd=d)
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{who}.pem", "-days", 2, "-extfile", f"{who}.ext",
                cwd=d)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-out", "other.key", cwd=d)
    return d
