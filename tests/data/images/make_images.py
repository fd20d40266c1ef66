#!/usr/bin/env python3
"""Writes the decoding fixtures of tests/image_decode_test.cpp: small
images of known pixels in every kind the ImageFolder source must read, and
what a reference decoder (Pillow, which also decodes with libjpeg-turbo's
accurate IDCT) makes of each, as raw RGB. Run it again only to change them;
the files are committed.
  tests/data/images/make_images.py [DIR]
Outputs per NAME: NAME.<ext> and NAME.rgb (Pillow's convert("RGB"), H x W x 3
bytes); known.rgb holds the pixels every image was made from."""
import io
import os
import sys

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
W, H = 40, 30


def known_pixels():
    """A smooth gradient with a few sharp bars: something for chroma and edges."""
    px = bytearray()
    for y in range(H):
        for x in range(W):
            bar = 80 if (x // 5) % 3 == 0 else 0
            px += bytes([(x * 6 + bar) % 256, (y * 8) % 256, (255 - x * 3 - y * 2 + bar // 2) % 256])
    return bytes(px)


def save(directory, name, image, fmt, **options):
    buf = io.BytesIO()
    image.save(buf, fmt, **options)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(buf.getvalue())
    with Image.open(io.BytesIO(buf.getvalue())) as decoded:
        ref = decoded.convert("RGB").tobytes()
    with open(os.path.join(directory, os.path.splitext(name)[0] + ".rgb"), "wb") as f:
        f.write(ref)


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else HERE
    px = known_pixels()
    with open(os.path.join(directory, "known.rgb"), "wb") as f:
        f.write(px)
    rgb = Image.frombytes("RGB", (W, H), px)
    save(directory, "baseline.jpg", rgb, "JPEG", quality=95)
    save(directory, "progressive.jpg", rgb, "JPEG", quality=95, progressive=True)
    save(directory, "subsampled.jpg", rgb, "JPEG", quality=90, subsampling=2)  # 4:2:0, fancy upsampling
    save(directory, "gray.jpg", rgb.convert("L"), "JPEG", quality=95)
    save(directory, "cmyk.jpg", rgb.convert("CMYK"), "JPEG", quality=95)  # Adobe marker, inverted
    save(directory, "rgb.png", rgb, "PNG")
    save(directory, "gray_png.png", rgb.convert("L"), "PNG")
    rgba = rgb.copy()
    rgba.putalpha(Image.linear_gradient("L").resize((W, H)))
    save(directory, "rgba.png", rgba, "PNG")
    save(directory, "png_named.jpg", rgb, "PNG")  # a PNG with a .jpg name


if __name__ == "__main__":
    main()
