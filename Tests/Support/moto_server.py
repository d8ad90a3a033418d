#!/usr/bin/env python3
"""A real S3 API on 127.0.0.1 for the tests: moto's server, with SigV4 verified.

Started with INITIAL_NO_AUTH_ACTION_COUNT=4, moto answers the first four requests without checking
their signature and verifies SigV4 on every request after them. The four are spent here: an IAM user,
its access key, an s3:* policy, and attaching it. Prints one JSON line (port and the user's key) and
serves until its standard input closes, so it never outlives the test process that started it.
"""
import json
import os
import sys

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "4"  # read when moto is imported

import boto3  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402

server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
_, port = server.get_host_and_port()
endpoint = f"http://127.0.0.1:{port}"

# The four unauthenticated calls: any key will do for them.
iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
iam.create_user(UserName="herald-tests")
key = iam.create_access_key(UserName="herald-tests")["AccessKey"]
policy = iam.create_policy(PolicyName="herald-tests-s3", PolicyDocument=json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}))
iam.attach_user_policy(UserName="herald-tests", PolicyArn=policy["Policy"]["Arn"])

print(json.dumps({
    "port": port,
    "accessKeyID": key["AccessKeyId"],
    "secretAccessKey": key["SecretAccessKey"],
}), flush=True)

sys.stdin.read()  # until the test process closes the pipe (or exits)
server.stop()
