#! -*- coding:utf-8 -*-
# Sentiment classification with a simplified vocabulary and keep_tokens: a bert4keras script
# ported to kbert by changing its imports (docs/migrating-from-bert4keras.md shows the diff).
# Paths come from the environment so that the test suite can run it on small files:
#   BERT_DIR   bert_config.json, bert_model.ckpt.*, vocab.txt (Google's Chinese BERT)
#   DATA_DIR   sentiment.{train,valid,test}.data (text<TAB>label)
#   EPOCHS, MAXLEN
import os

import keras
from keras.layers import Dense, Lambda
from keras.optimizers import Adam
from kbert import Tokenizer, load_vocab
from kbert import build_transformer_model
from kbert import extend_with_piecewise_linear_lr
from kbert import sequence_padding, DataGenerator

num_classes = 2
maxlen = int(os.environ.get('MAXLEN', 128))
batch_size = 32
epochs = int(os.environ.get('EPOCHS', 10))
bert_dir = os.environ.get('BERT_DIR', 'chinese_L-12_H-768_A-12')
data_dir = os.environ.get('DATA_DIR', 'datasets/sentiment')
config_path = os.path.join(bert_dir, 'bert_config.json')
checkpoint_path = os.path.join(bert_dir, 'bert_model.ckpt')
dict_path = os.path.join(bert_dir, 'vocab.txt')


def load_data(filename):
    D = []
    with open(filename, encoding='utf-8') as f:
        for l in f:
            text, label = l.strip().split('\t')
            D.append((text, int(label)))
    return D


train_data = load_data(os.path.join(data_dir, 'sentiment.train.data'))
valid_data = load_data(os.path.join(data_dir, 'sentiment.valid.data'))
test_data = load_data(os.path.join(data_dir, 'sentiment.test.data'))

# A smaller vocabulary: only the tokens the tokenizer can produce
token_dict, keep_tokens = load_vocab(
    dict_path=dict_path,
    simplified=True,
    startswith=['[PAD]', '[UNK]', '[CLS]', '[SEP]'],
)
tokenizer = Tokenizer(token_dict, do_lower_case=True)


class data_generator(DataGenerator):
    def __iter__(self, random=False):
        batch_token_ids, batch_segment_ids, batch_labels = [], [], []
        for is_end, (text, label) in self.sample(random):
            token_ids, segment_ids = tokenizer.encode(text, maxlen=maxlen)
            batch_token_ids.append(token_ids)
            batch_segment_ids.append(segment_ids)
            batch_labels.append([label])
            if len(batch_token_ids) == self.batch_size or is_end:
                batch_token_ids = sequence_padding(batch_token_ids)
                batch_segment_ids = sequence_padding(batch_segment_ids)
                batch_labels = sequence_padding(batch_labels)
                yield [batch_token_ids, batch_segment_ids], batch_labels
                batch_token_ids, batch_segment_ids, batch_labels = [], [], []


# The pre-trained model, keeping only the rows of keep_tokens
bert = build_transformer_model(
    config_path=config_path,
    checkpoint_path=checkpoint_path,
    model='bert',
    return_keras_model=False,
    keep_tokens=keep_tokens,
)

output = Lambda(lambda x: x[:, 0], name='CLS-token')(bert.model.output)
output = Dense(
    units=num_classes,
    activation='softmax',
    kernel_initializer=bert.initializer
)(output)

model = keras.models.Model(bert.model.input, output)
model.summary()

AdamLR = extend_with_piecewise_linear_lr(Adam, name='AdamLR')

model.compile(
    loss='sparse_categorical_crossentropy',
    optimizer=AdamLR(learning_rate=1e-4, lr_schedule={
        1000: 1,
        2000: 0.1
    }),
    metrics=['accuracy'],
)

train_generator = data_generator(train_data, batch_size)
valid_generator = data_generator(valid_data, batch_size)
test_generator = data_generator(test_data, batch_size)


def evaluate(data):
    total, right = 0., 0.
    for x_true, y_true in data:
        y_pred = model.predict(x_true, verbose=0).argmax(axis=1)
        y_true = y_true[:, 0]
        total += len(y_true)
        right += (y_true == y_pred).sum()
    return right / total


class Evaluator(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.best_val_acc = 0.

    def on_epoch_end(self, epoch, logs=None):
        val_acc = evaluate(valid_generator)
        if val_acc > self.best_val_acc:
            self.best_val_acc = val_acc
            model.save_weights('best_model.weights.h5')
        test_acc = evaluate(test_generator)
        print(
            u'val_acc: %.5f, best_val_acc: %.5f, test_acc: %.5f\n' %
            (val_acc, self.best_val_acc, test_acc)
        )


if __name__ == '__main__':
    evaluator = Evaluator()
    model.fit(
        train_generator.forfit(),
        steps_per_epoch=len(train_generator),
        epochs=epochs,
        callbacks=[evaluator]
    )
    model.load_weights('best_model.weights.h5')
    print(u'final test acc: %05f\n' % (evaluate(test_generator)))
