"""Talking to AWS with boto3: sessions from srv-configs, and the embedded moto server for local runs."""
