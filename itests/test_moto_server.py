import boto3


def test_boto3_talks_to_moto_over_http(moto_server):
    s3 = boto3.client("s3", endpoint_url=moto_server.url, region_name="us-west-2")
    s3.create_bucket(Bucket="bucket-one", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="bucket-one", Key="k", Body=b"v")
    assert s3.get_object(Bucket="bucket-one", Key="k")["Body"].read() == b"v"
    moto_server.reset()
    assert s3.list_buckets()["Buckets"] == []
