"""placeholder"""
def main() -> None:
    print("berth")
