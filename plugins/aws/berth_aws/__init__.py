"""berth-aws: Berth's AWS platform plugins (boto3).

* :mod:`berth_aws.secrets` — the ``aws-sm`` secret provider (AWS Secrets Manager).
"""
